nodewatchd 27120226 223
 
